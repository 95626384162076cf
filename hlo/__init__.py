"""The HLO model every stage shares: loading modules, their proto schema, layouts,
fingerprints and the environment a module is compiled for."""

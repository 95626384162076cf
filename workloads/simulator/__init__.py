"""The fleet simulator: a realistic fleet that hands us dumps and profile drops."""

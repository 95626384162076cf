"""Ranking: Beam pipelines that rank graphs and ops by fleet cost (issue: ranking stage)."""

"""Mind2Web: synthetic data in the official format, data preparation and the web env server."""

"""Retrieval server: Flask app factory (`app`), process entry point (`server`, run with
`python -m env.retrieval`) and a launcher (`launcher`) that starts, health-checks and stops it.
"""

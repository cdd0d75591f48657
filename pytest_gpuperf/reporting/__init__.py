"""Renderers: pure functions from results to text (terminal, JSON, Markdown, HTML)."""

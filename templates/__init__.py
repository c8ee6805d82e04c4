"""Jinja2 templates for the HTML report (installed as ``auditor.templates``)."""

"""Tool-call families: one file each, one line each in pipeline/parse/tools.py."""

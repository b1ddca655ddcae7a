"""pipeline/parse."""

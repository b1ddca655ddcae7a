"""rotor: an OpenAI-compatible LLM serving frontend in front of token-in/token-out engines."""

__version__ = "0.1.0"

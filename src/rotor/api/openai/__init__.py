"""OpenAI's chat completions and (legacy) completions: the shapers that turn
the internal events into their chunks, the folds of those chunks, the routes."""

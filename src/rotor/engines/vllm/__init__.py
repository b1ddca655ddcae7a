"""vLLM behind rotor's frontend: token ids in, token ids out (`out=vllm`).

Nothing here imports vLLM until the engine is built (`engine.VLLMEngine`)."""

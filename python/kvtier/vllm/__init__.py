"""kvtier inside vLLM 0.33 (see docs/vllm.md)."""

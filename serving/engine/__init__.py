"""The engine process: the embedded Triton server (``python -m serving.engine.triton_server``) and what runs in
it: the CPU engine (llama.cpp through llama-cpp-python, its kernels, scheduler, speculation, KV pool and disk
tier) and the embedder. Workers never import it: they reach it through Triton (serving/engine_api.py)."""

"""localspec: exact speculative decoding for local GGUF models over llama.cpp."""

# Load llama.cpp's shared libraries before numpy. On the CUDA image of the lent GPU machine the
# other order was seen to segfault at model load (numpy 2.5.2, twice); loading libggml first is
# harmless everywhere, so every entry point (CLI, server, library) gets this order.
try:  # noqa: SIM105 - llama_cpp may be absent in a numpy-only checkout of the sampling math
    import llama_cpp  # noqa: F401
except ImportError:  # pragma: no cover
    pass

__version__ = "0.1.0"

"""localspec: exact speculative decoding for local GGUF models over llama.cpp."""

import ctypes
import sys


def _cxx_runtime_global() -> None:
    """Make the C++ runtime (libstdc++) part of the process's global symbol scope before llama.cpp
    loads. A CUDA build's libggml-cuda.so carries and exports its own copy of libstdc++'s code
    (3,465 std:: symbols in the vendored llama.cpp built with CUDA 13). Where an extension module
    has loaded libstdc++ privately first (numpy's does; Python opens extension modules without
    RTLD_GLOBAL), libllama's calls into the C++ runtime were seen to bind to that copy, whose locale
    was never set up: loading any model segfaulted in llama_model::print_info (writing a number to a
    stream). With libstdc++ global, every library binds to the one real runtime; elsewhere this
    changes nothing, since libllama links it anyway."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
        except OSError:  # pragma: no cover - a system without GNU's C++ runtime has no such copy to clash with
            pass


_cxx_runtime_global()
# Load llama.cpp's shared libraries before numpy too (the order every entry point had already, which
# avoided the crash above where localspec was imported first).
try:  # noqa: SIM105 - llama_cpp may be absent in a numpy-only checkout of the sampling math
    import llama_cpp  # noqa: F401
except ImportError:  # pragma: no cover
    pass

__version__ = "0.1.0"

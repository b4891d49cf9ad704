"""deformd_client — Python client for deformd (standard library only; numpy when present).

    from deformd_client import HttpClient, SocketClient
    with HttpClient("127.0.0.1", 8000) as c:
        out = c.infer("morphcube", {"weights": [0.5, 0.0]})
        out = c.infer("ict_to_t1", {"source_weights": {"jawOpen": 0.7}})   # by name
        positions = out["positions"]          # Tensor: .shape, .data, .numpy()
    with SocketClient("127.0.0.1", 8001) as s:
        frames = s.play("wuson", "Walk", fps=30)["positions"]   # [F, N, 3]

Transports: `HttpClient` (KServe v2 JSON and binary-data extension, see
docs/http-api.md) and `SocketClient` (binary frames, pipelined, see
docs/protocol.md). The command line (`python3 -m deformd_client`) has the
verbs of deformctl: list, info, infer, play, mesh.
"""
from .tensor import Tensor, as_tensor, HAVE_NUMPY
from .http import HttpClient, DeformdError, parse_infer_response
from .sock import SocketClient
from .clips import match_clip, default_clip
from .names import named_input
from . import npy

__version__ = "0.1.0"
__all__ = ["Tensor", "as_tensor", "HAVE_NUMPY", "HttpClient", "SocketClient",
           "DeformdError", "parse_infer_response", "match_clip", "default_clip", "named_input",
           "npy",
           "__version__"]

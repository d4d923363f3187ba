"""tests/models reuses the capture suite's differential harness (tests/capture/harness.py)."""
import os
import sys

_CAPTURE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "capture")
if _CAPTURE not in sys.path:
    sys.path.insert(0, _CAPTURE)

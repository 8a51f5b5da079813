"""python -m kdart ...: the kdart command with the NVRTC a Python process uses (kdart.cli)."""
import sys

from .cli import main

sys.exit(main())

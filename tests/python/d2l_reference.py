"""tools/seed_modules.py, d2l's PyTorch modules as the tests' reference,
loaded by path (tools/ is not a package). pytest puts this folder on
sys.path: `from d2l_reference import seed`."""

import importlib.util
import os

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "tools",
                     "seed_modules.py")
_spec = importlib.util.spec_from_file_location("seed_modules", _PATH)
seed = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(seed)

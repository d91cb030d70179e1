import sys
from pathlib import Path

# tests/fakes.py is shared by the unit, bench and UI tests.
sys.path.insert(0, str(Path(__file__).parent))

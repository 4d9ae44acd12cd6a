"""What the chart scripts in scripts/ share."""
import sys


def pyplot(script):
    """matplotlib.pyplot with the file-only Agg backend, or None after saying on stderr
    that matplotlib is missing (the caller decides the exit status)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"{script}: matplotlib is not installed (pip install matplotlib); no chart drawn", file=sys.stderr)
        return None
    return plt

"""The debugging guide's entries, runnable (`from kernels.debugging import names, run`): lesson 10's
content, kept in kernels/lessons/lesson10_debugging.py; this name is the one the guide and the notebook use."""
from .lessons.lesson10_debugging import *  # noqa: F401,F403
from .lessons.lesson10_debugging import __all__, main  # noqa: F401

if __name__ == "__main__":
    import sys

    sys.exit(main())

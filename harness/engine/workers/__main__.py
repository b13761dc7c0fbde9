"""A worker in a fresh interpreter: `python -m harness.engine.workers ROLE FD` (launch.py)."""
import sys

from .launch import begin, main

begin()  # before main() imports torch
main(sys.argv)

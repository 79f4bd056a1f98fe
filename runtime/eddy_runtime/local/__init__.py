"""``eddy run``: a StreamApp on this machine with one command."""

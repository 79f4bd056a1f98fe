"""`python -m eddy_operator`: the same as `eddy-operator`."""

from eddy_operator.main import main

main()

import sys

from mpisgd.cli import main

sys.exit(main())

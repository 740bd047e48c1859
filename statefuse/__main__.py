import sys

from statefuse.cli import main

sys.exit(main())

import sys

from statefuse.entry.cli import main

sys.exit(main())

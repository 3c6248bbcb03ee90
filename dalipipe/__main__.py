import sys

from dalipipe.cli import main

sys.exit(main())

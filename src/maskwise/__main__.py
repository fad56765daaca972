import sys

from maskwise.cli import main

sys.exit(main())

import sys

from harness.drive.cli import main

sys.exit(main())

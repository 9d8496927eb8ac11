import sys

from harness.drive.commands.cli import main

sys.exit(main())

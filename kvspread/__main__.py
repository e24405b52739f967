"""`python -m kvspread` is the `kvspread` command."""

import sys

from kvspread.cli import main

sys.exit(main())

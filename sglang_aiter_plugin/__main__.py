import sys

from sglang_aiter_plugin.cli import main

sys.exit(main())

"""`python -m elastic_kubectl` runs `kubectl etj`."""
import sys

from elastic_kubectl.cli import main

sys.exit(main())

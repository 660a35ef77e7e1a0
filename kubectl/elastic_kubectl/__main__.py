"""`python -m elastic_kubectl` runs `kubectl etj`."""
import sys

from elastic_kubectl.kubectl_cli import main

sys.exit(main())

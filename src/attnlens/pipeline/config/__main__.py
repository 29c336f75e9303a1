"""``python -m attnlens.pipeline.config > config/README.md``: every config key, from the schema."""

import argparse

from attnlens.pipeline.config.markdown import schema_markdown

if __name__ == "__main__":
    doc = "Print config/README.md, every config key (python -m attnlens.pipeline.config > config/README.md)"
    argparse.ArgumentParser(prog="python -m attnlens.pipeline.config", description=doc).parse_args()
    print(schema_markdown(), end="")

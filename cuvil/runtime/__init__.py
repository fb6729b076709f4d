"""Running compiled models outside the compiler: the `.cuv` artifact's loaders and the standalone C runtime (c/)."""

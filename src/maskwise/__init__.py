"""maskwise: encoder, decoder and encoder-decoder transformers from one block.

``maskwise.load(path)`` opens a maskwise run folder or a local Hugging Face model folder, and
``maskwise.load_fine_tuned(path)`` the classifier or tagger one holds. Both are resolved on first use,
so ``import maskwise`` stays cheap (no torch until a model is asked for).
"""

LAZY = ("load", "load_fine_tuned")  # maskwise.interop.folders' openers


def __getattr__(name: str):
    if name in LAZY:
        # deferred: `import maskwise` stays cheap (no torch until a model is asked for, as the docstring says)
        from maskwise.interop import folders

        return getattr(folders, name)
    raise AttributeError(f"module 'maskwise' has no attribute {name!r}")

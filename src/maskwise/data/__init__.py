"""Text corpora, tokenizers and the datasets derived from them."""

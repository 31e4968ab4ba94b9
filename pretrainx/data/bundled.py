"""The files that ship inside the package, which the CPU-size recipes train on: three
public-domain books (two to train on, Alice held out) and tokenizers built from them."""

import os

ASSETS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets")
TRAIN_BOOKS = ("pg1342_pride_and_prejudice.txt", "pg1661_adventures_of_sherlock_holmes.txt")
EVAL_BOOK = "pg11_alice_in_wonderland.txt"


def book(name: str) -> str:
    return os.path.join(ASSETS, "text", name)


def use_books(data, tokenizer: str) -> None:
    """Points a config's `data` at the bundled books and at the bundled `tokenizer`
    (a file name in pretrainx/assets)."""
    data.train_files = ",".join(book(name) for name in TRAIN_BOOKS)
    data.eval_files = book(EVAL_BOOK)
    data.tokenizer = os.path.join(ASSETS, tokenizer)

"""One declaration classifier per language, as ``indexer.syntax.symbols.extract`` dispatches to them."""

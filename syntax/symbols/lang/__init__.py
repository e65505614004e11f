"""One declaration classifier per language, as ``syntax.symbols.extract`` dispatches to them."""

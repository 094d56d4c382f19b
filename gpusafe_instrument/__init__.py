"""The PTX toolkit: front end (lexer, parser, AST, printer) and query layer."""

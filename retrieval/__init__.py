"""Documents in, ranked passages out: parsing, chunking, embedding, FAISS, SQLite store."""

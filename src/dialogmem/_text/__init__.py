"""Text helpers shared by every feature (pure, no I/O): words and keywords, time normalisation and
parsing, calendar tables, token counting, and the reader's rendering of hits."""

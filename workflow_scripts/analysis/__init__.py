"""What is read from a completion without running it: the extracted code and the static analysis."""

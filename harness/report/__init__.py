"""What reads the record store: the summary, markdown tables, the generated results docs, the
regression gate and the comparison pages. Nothing here measures."""

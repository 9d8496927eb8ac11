"""What a measurement leaves: the record, and the store that reads and writes records."""

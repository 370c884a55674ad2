"""The versioned artifact: a directory of plain files described by manifest.json."""

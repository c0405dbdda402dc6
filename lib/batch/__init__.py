"""Work over a phrase list on top of the service: the preload and the export."""

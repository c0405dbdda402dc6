"""The web UI's handlers and views (``webui.py`` builds the Gradio components and wires
them to these). Imports gradio: only the web UI imports this package."""

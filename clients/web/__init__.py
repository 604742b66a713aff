"""`tether web`: the page in a browser and the server that relays it to every workspace daemon
of this user on this machine (see docs/web.md). The server is `server.WebServer`; the page's
files are in `static/`, served as they are."""

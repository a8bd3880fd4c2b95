"""The dashboard: a web page over the service, to see, search and correct what is remembered."""

"""The model zoo: trained family, routing of random vs trained routers, real weights."""

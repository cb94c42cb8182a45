"""Datasets on the request side: where a URI may point (``paths``), what its columns are (``schema``), the registry
of named datasets (``registry``), and a request's dataset reference checked against the data (``check``)."""

"""Devices: transports (ssh, local), deployment of artifacts, and the on-device agent."""

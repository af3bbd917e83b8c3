# pytest finds app.py here: the guest's module is tested as it is built.

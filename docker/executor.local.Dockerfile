# The executor image from binaries compiled on this machine, for where no base image can be
# pulled (`make images` uses it then; DOCKER_BASE=local forces it). Its build context is the
# directory `make images` fills: the static executor, the host's CA certificates, and bin/ with
# Debian's busybox-static and a link per applet, so that SCRIPT jobs have /bin/sh and the
# usual commands (sed, date, sleep, …).
FROM scratch
COPY bin/ /bin/
COPY passwd group /etc/
COPY ca-certificates.crt /etc/ssl/certs/
# /tmp, world-writable and sticky, for scripts that use mktemp.
COPY root/ /
COPY ejcloud-executor /usr/local/bin/
# The agent starts it with the MESOS_* environment of the v1 executor API.
ENTRYPOINT ["/usr/local/bin/ejcloud-executor"]

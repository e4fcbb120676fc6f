# The scheduler image from binaries compiled on this machine, for where no base image can be
# pulled (`make images` uses it then; DOCKER_BASE=local forces it). Its build context is the
# directory `make images` fills: the static (CGO_ENABLED=0) binaries, the host's CA
# certificates (Debian's ca-certificates) and passwd/group naming the non-root user 65532, as
# the public base image (distroless static, :nonroot) has them. Time zones come from Go's
# time/tzdata, embedded in the scheduler.
FROM scratch
COPY passwd group /etc/
COPY ca-certificates.crt /etc/ssl/certs/
# The executor is kept gzipped (a third of its size); the scheduler serves it decompressed.
COPY ejcloud-scheduler ejcloud-executor.gz /usr/local/bin/
USER 65532:65532
EXPOSE 8899
ENTRYPOINT ["/usr/local/bin/ejcloud-scheduler"]
CMD ["--http-addr", "0.0.0.0:8899", "--executor-binary", "/usr/local/bin/ejcloud-executor.gz"]

package api

import (
	"encoding/json"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/ejcloud/ejcloud/config"
)

func (s *Server) appRoutes(r *mux.Router) {
	r.HandleFunc("/api/app", s.createApp).Methods(http.MethodPost)
	r.HandleFunc("/api/app", s.updateApp).Methods(http.MethodPut)
	r.HandleFunc("/api/app/list", s.listApps).Methods(reads()...)
	r.HandleFunc("/api/app/{appName}", s.getApp).Methods(reads()...)
	r.HandleFunc("/api/app/{appName}", s.deleteApp).Methods(http.MethodDelete)
	r.HandleFunc("/api/app/{appName}/disable", s.appDisabled).Methods(reads()...)
	r.HandleFunc("/api/app/{appName}/disable", s.disableApp).Methods(http.MethodPost)
	r.HandleFunc("/api/app/{appName}/disable", s.enableApp).Methods(http.MethodDelete) // the 2.1.5 form
	r.HandleFunc("/api/app/{appName}/enable", s.enableApp).Methods(http.MethodPost)
}

func (s *Server) createApp(w http.ResponseWriter, r *http.Request) {
	b, ok := body(w, r)
	if !ok {
		return
	}
	a, err := config.DecodeApp(b)
	if err == nil {
		err = config.CheckNewName("appName", a.AppName)
	}
	if err == nil {
		err = config.CheckStoredSize(a, s.store.MaxConfigBytes())
	}
	if err == nil {
		err = s.store.CreateApp(r.Context(), a)
	}
	if err != nil {
		s.failWrite(w, r, err, a)
		return
	}
	noContent(w)
}

// updateApp applies the fields present in the body to the stored app (a partial update,
// SPEC §3.1), validated as a whole and written under a version check.
func (s *Server) updateApp(w http.ResponseWriter, r *http.Request) {
	b, ok := body(w, r)
	if !ok {
		return
	}
	// A map, not a struct: encoding/json matches a struct's keys case-insensitively, and
	// "appname" would name the app that PatchApp then refuses the key of.
	fields, err := config.Fields(b)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var name string
	if json.Unmarshal(fields["appName"], &name) != nil || name == "" {
		s.fail(w, r, &config.FieldError{Field: "appName", Message: "appName is required and names the app to update"})
		return
	}
	var next config.App
	_, err = s.store.UpdateApp(r.Context(), name, func(cur config.App) (config.App, error) {
		a, err := config.PatchApp(cur, b)
		if err == nil {
			err = config.CheckStoredSize(a, s.store.MaxConfigBytes())
		}
		next = a
		return a, err
	})
	if err != nil {
		s.failWrite(w, r, err, next)
		return
	}
	if err := s.sched.AppUpdated(r.Context(), name); err != nil {
		s.fail(w, r, err)
		return
	}
	noContent(w)
}

func (s *Server) listApps(w http.ResponseWriter, r *http.Request) {
	apps, err := s.store.Apps(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if apps == nil {
		apps = []config.App{}
	}
	writeJSON(w, http.StatusOK, apps)
}

func (s *Server) getApp(w http.ResponseWriter, r *http.Request) {
	a, err := s.store.App(r.Context(), mux.Vars(r)["appName"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func (s *Server) deleteApp(w http.ResponseWriter, r *http.Request) {
	// Refused (409) while a job of another app depends on one of the app's.
	s.op(w, r, s.sched.DeleteApp, mux.Vars(r)["appName"])
}

func (s *Server) appDisabled(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["appName"]
	if _, err := s.store.App(r.Context(), name); err != nil {
		s.fail(w, r, err)
		return
	}
	off, err := s.store.AppDisabled(r.Context(), name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, off)
}

func (s *Server) disableApp(w http.ResponseWriter, r *http.Request) {
	s.op(w, r, s.sched.DisableApp, mux.Vars(r)["appName"])
}

func (s *Server) enableApp(w http.ResponseWriter, r *http.Request) {
	s.op(w, r, s.sched.EnableApp, mux.Vars(r)["appName"])
}
